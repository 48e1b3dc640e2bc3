"""`workbench draft`: not built yet (see the issue that owns it)."""

NAME = "draft"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench draft: not built yet")
    return 2
