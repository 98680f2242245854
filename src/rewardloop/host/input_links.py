"""Jobs name the files they read from outside results/ by content, not by path.

A job's params hold its config; with the base model's path in them, moving the model folder, spelling
it another way, or re-downloading the same weights into a new hub snapshot changed every model job's
params and reran them all. So the params hold, in place of such a path, a link named after the
file's content identity (rewardloop.fingerprint): ``results/.inputs/<fingerprint>``, which points at
wherever the file is now. The same content anywhere gives the same params; other content, other
params (and the jobs that read it rerun).

Only a workflow run uses links (the Snakefile calls ``use``); a stage called from Python with
``stage_config``'s output gets the paths as given. In the run's main process the links are placed when
jobs are about to run (``onstart``), so a dry run writes none: every link the planning named is placed
then, and any named later (params evaluated lazily) at once. A cluster job, which parses the Snakefile
again, places its own (the same links) and finds them on the shared filesystem.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FOLDER = ".inputs"

_named: dict[str, str] = {}  # link path -> the path it points at, named by this process so far
_mode: str | None = None  # None: paths as given; "defer": named, placed at place_all; "place": at once


def use(defer: bool) -> None:
    """Jobs of this workflow read inputs through links (the Snakefile). ``defer``: the run's main process,
    which places them at ``place_all`` (onstart), so that a dry run writes none."""
    global _mode
    _mode = "defer" if defer else "place"


def link_for(results: str, identity: str, target: str) -> str:
    """The path a job reads ``target`` (whose content identity is ``identity``) by: a link under ``results``,
    named after the identity (and a file's suffix, which loaders may go by); ``target`` itself outside a
    workflow run (a stage called from Python)."""
    if _mode is None:
        return target
    suffix = Path(target).suffix if Path(target).is_file() else ""
    link = f"{results}/{FOLDER}/{identity}{suffix}"
    _named[link] = os.path.abspath(target)
    if _mode == "place":
        _place(link, _named[link])
    return link


def place_all() -> None:
    """Place every link named so far, and from now on each as it is named (a run's onstart)."""
    global _mode
    _mode = "place"
    for link, target in _named.items():
        _place(link, target)


def _place(link: str, target: str) -> None:
    """``link`` -> ``target``, replaced atomically if it points elsewhere (the content moved). A copy where
    the link was (a tool that copied the run folder following its links) is removed first: the folder
    is this module's own, and holds nothing but links."""
    if os.path.islink(link) and os.readlink(link) == target:
        return
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    Path(link).parent.mkdir(parents=True, exist_ok=True)
    temp = f"{link}.{os.getpid()}.tmp"
    if os.path.lexists(temp):
        os.unlink(temp)
    os.symlink(target, temp)
    os.replace(temp, link)


def described(path: str | os.PathLike | None) -> str:
    """How provenance names a path a job read: an input link as ``<where it points> (<identity>)``."""
    if isinstance(path, (str, os.PathLike)) and Path(path).parent.name == FOLDER and os.path.islink(path):
        return f"{os.readlink(path)} ({Path(path).stem})"
    return str(path)
