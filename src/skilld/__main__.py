from skilld.cli import entry_point

entry_point()
