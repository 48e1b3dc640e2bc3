"""A section whose input is absent is left out of the exported page and listed under "Not in this report".

    >>> from workbench.report.sections import absent
    >>> absent("Features from the serving engine", "make engine-fidelity-real measures them")
    Features from the serving engine: not in this report. make engine-fidelity-real measures them

A page's code calls :func:`absent` where its input is missing (in a notebook, one display carrying
:data:`ABSENT_KEY` in its metadata); the export's :func:`leave_out_absent` removes that section and lists it, with how
to get it, at the end of the page (issue 58: no empty section).
"""

from __future__ import annotations

#: the output metadata key of a section whose input is absent (:func:`absent`); the export leaves the section out
ABSENT_KEY = "workbench_absent"


def absent(section: str, how: str) -> None:
    """Say that ``section`` has no input here and ``how`` to get it. In a notebook this is one display that the
    exported page turns into a line of its "Not in this report" list, leaving the section out
    (:func:`clean_for_export`); in a terminal, one printed line.

        >>> absent("Long context", "python -m bench.long_context writes it")
        Long context: not in this report. python -m bench.long_context writes it
    """
    line = f"{section}: not in this report. {how}"
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is None:
        print(line)
        return
    display({"text/markdown": f"*{section}*: not in this report. {how}", "text/plain": line},
            raw=True, metadata={ABSENT_KEY: {"section": section, "how": how}})


def leave_out_absent(nb) -> list[str]:
    """Remove, in place, each section of ``nb`` whose code said :func:`absent`: that code cell, the markdown cells
    just before it (its heading and words) and the code cells after it that show nothing, up to the next markdown
    cell. One "Not in this report" markdown cell at the end lists each section and how to get it. Returns the lines."""
    import nbformat

    def said(cell):
        return next((o["metadata"][ABSENT_KEY] for o in cell.get("outputs", [])
                     if isinstance(o.get("metadata"), dict) and ABSENT_KEY in o["metadata"]), None)

    cells, drop, lines = nb.cells, set(), []
    for i, cell in enumerate(cells):
        what = said(cell) if cell.get("cell_type") == "code" else None
        if what is None:
            continue
        lines.append(f"- **{what['section']}**: {what['how']}")
        drop.add(i)
        j = i - 1
        while j >= 0 and cells[j].get("cell_type") == "markdown":
            drop.add(j)
            j -= 1
        j = i + 1
        while j < len(cells) and cells[j].get("cell_type") == "code" and not cells[j].get("outputs"):
            drop.add(j)
            j += 1
    if not lines:
        return []
    nb.cells = [c for k, c in enumerate(cells) if k not in drop]
    nb.cells.append(nbformat.v4.new_markdown_cell("## Not in this report\n" + "\n".join(dict.fromkeys(lines))))
    return lines


__all__ = ["ABSENT_KEY", "absent", "leave_out_absent"]
