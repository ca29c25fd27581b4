# Root conftest (the design card keeps one at the root); test-suite settings live in tests/conftest.py.
