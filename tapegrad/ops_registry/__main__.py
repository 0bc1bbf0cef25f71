"""``python -m tapegrad.ops_registry``: every registered op and what it supports (the
table of the documentation's op reference; columns: ``tapegrad.testing.capabilities``).

    python -m tapegrad.ops_registry [--markdown] [--summary] [--no-compile] [OP ...]

``--summary`` prints the capability matrix (ops per value of each column) instead;
``--no-compile`` skips the tg.compile probe (one captured program per op); OP names
restrict the table to those ops.
"""
import argparse
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tapegrad.ops_registry",
                                description="every registered op and what it supports")
    p.add_argument("ops", nargs="*", metavar="OP", help="only these ops")
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    p.add_argument("--summary", action="store_true", help="the capability matrix")
    p.add_argument("--no-compile", action="store_true", help="skip the tg.compile probe")
    a = p.parse_args(argv)
    import tapegrad.ops_registry as reg
    from tapegrad.testing import capabilities as cap
    ops = [reg.get(n) for n in a.ops] if a.ops else None
    table = cap.rows(ops, probe_compile=not a.no_compile)
    if a.summary:
        sys.stdout.write(cap.markdown_summary(table))
    elif a.markdown:
        sys.stdout.write(cap.markdown_table(table))
    else:
        sys.stdout.write(cap.text_table(table))


if __name__ == "__main__":
    main()
