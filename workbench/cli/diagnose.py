"""`workbench diagnose`: not built yet (see the issue that owns it)."""

NAME = "diagnose"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench diagnose: not built yet")
    return 2
