"""The pure core: the machine as data (``model``), what a link should carry and the threshold rules
(``spec``), requirements and their verdicts (``requirements``), and the one reader of numbers in
text (``numtext``). Standard library only: no I/O, no environment, no pytest."""
