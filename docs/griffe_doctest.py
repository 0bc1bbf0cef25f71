"""A Griffe extension for the API reference: the doctest examples of a docstring
(``>>>`` lines, their ``...`` continuations and the output up to a blank line) become
fenced ``pycon`` code, so Markdown shows them as code instead of reading their brackets
as links."""
import griffe


def fence_doctests(text):
    """``text`` with each run of doctest lines wrapped in a ```pycon fence."""
    out, inside, fence = [], False, False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("```"):
            fence = not fence
        if not fence and not inside and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(indent + "```pycon")
            inside = True
        elif inside and not stripped:
            out.append(indent + "```")
            inside = False
        out.append(line)
    if inside:
        out.append(indent + "```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence the doctest examples of every docstring Griffe loads."""

    def on_instance(self, *, node, obj, agent, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
