"""The pytest plugin: hooks (``hooks``, the entry point), hookspecs for other plugins
(``hookspecs``), settings (``options``), markers (``markers``) and what a run judges beyond the
topology (``checks``). Nothing outside this package imports it."""
