"""One module per ``trtkit`` subcommand: argument definitions and a thin ``run`` into the library."""


def int_list(text, option="LIST", example="1,8,32"):
    """'1,8,32' -> [1, 8, 32] ('' -> []); InputError naming ``option`` when an item is not an integer."""
    from trtkit.errors import InputError
    try:
        return [int(x) for x in str(text or "").split(",") if x.strip()]
    except ValueError:
        raise InputError("{} '{}' is not a comma list of integers".format(option, text),
                         hint="e.g. {} {}".format(option, example))
