"""Every text and JSON document the plugin and the command line show: no I/O."""
