"""The V4A patch format, as models trained for `apply_patch` write it (Codex's envelope), cut into
the file operations of OpenAI's `apply_patch_call` items, and an operation written back as the
envelope of its one file (what a later turn's model reads). Pure.

    *** Begin Patch
    *** Add File: notes/hello.txt
    +hello
    *** Update File: app.py
    @@ def main():
    -    print("hi")
    +    print("hello")
    *** Delete File: old.txt
    *** End Patch

An added file's lines each begin with `+`; an updated file's hunks hold `@@` anchors and lines
beginning with ` `, `-` or `+` (and `*** End of File`). An operation's `diff` is its lines as
written, as OpenAI's items carry them. `*** Move to:` has no place in an `update_file` operation:
it is refused, with what to write instead.
"""

from __future__ import annotations

from app.protocol.shapes import Item

BEGIN, END = "*** Begin Patch", "*** End Patch"
_HEADERS = {"*** Add File: ": "create_file", "*** Update File: ": "update_file", "*** Delete File: ": "delete_file"}
_HUNK_LINE = (" ", "-", "+", "@@", "*** End of File")


class PatchError(ValueError):
    """What is wrong with a patch, worded for the model that wrote it."""


def operations(patch: str) -> list[Item]:
    """The patch's file operations, in order; PatchError if it is not a V4A patch."""
    lines = patch.strip().splitlines()
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"A patch must begin with the line '{BEGIN}'.")
    if lines[-1].strip() != END:
        raise PatchError(f"A patch must end with the line '{END}'.")
    found: list[Item] = []
    body: list[str] = []
    for number, line in enumerate(lines[1:-1], start=2):
        header = next((h for h in _HEADERS if line.startswith(h)), None)
        if header is not None:
            _close(found, body)
            body = []
            found.append({"type": _HEADERS[header], "path": _path(line[len(header) :], number)})
        elif line.startswith("*** Move to:"):
            raise PatchError(
                f"Line {number}: '*** Move to:' is not supported; add the file at its new path and delete the old one."
            )
        elif not found:
            raise PatchError(f"Line {number}: expected '*** Add File:', '*** Update File:' or '*** Delete File:'.")
        else:
            body.append(_checked(found[-1], line, number))
    _close(found, body)
    if not found:
        raise PatchError("The patch changes no file.")
    return found


def envelope(operation: Item) -> str:
    """One operation as the patch of its one file."""
    header = next(h for h, kind in _HEADERS.items() if kind == operation["type"])
    diff = operation.get("diff") or ""
    if diff and not diff.endswith("\n"):
        diff += "\n"
    return f"{BEGIN}\n{header}{operation['path']}\n{diff}{END}"


def _path(raw: str, number: int) -> str:
    path = raw.strip()
    if not path:
        raise PatchError(f"Line {number}: the file's path is missing.")
    if path.startswith("/") or "\\" in path or ".." in path.split("/"):
        raise PatchError(f"Line {number}: '{path}' must be a relative path inside the workspace.")
    return path


def _checked(operation: Item, line: str, number: int) -> str:
    kind = operation["type"]
    if kind == "delete_file":
        raise PatchError(f"Line {number}: a deleted file takes no lines.")
    if kind == "create_file" and not line.startswith("+"):
        raise PatchError(f"Line {number}: each line of an added file must begin with '+'.")
    if kind == "update_file" and line == "":
        return " "  # (an empty context line, its space dropped as editors do)
    if kind == "update_file" and not line.startswith(_HUNK_LINE):
        raise PatchError(f"Line {number}: a hunk's lines begin with ' ', '-', '+' or '@@'.")
    return line


def _close(found: list[Item], body: list[str]) -> None:
    if not found:
        return
    operation = found[-1]
    if operation["type"] == "delete_file":
        return
    if operation["type"] == "update_file" and not any(line.startswith(("-", "+")) for line in body):
        raise PatchError(f"The update of '{operation['path']}' changes no line.")
    operation["diff"] = "".join(f"{line}\n" for line in body)
