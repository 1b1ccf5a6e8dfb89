"""One module per ``trtkit`` subcommand: argument definitions and a thin ``run`` into the library."""


def int_or_none(text):
    return int(text) if text not in (None, "", "all") else None
