"""mkdocs hooks for the docs site (`mkdocs.yml`: `hooks`), run at every `mkdocs build`.

- The flags page is made from the CLI itself: the marker `<!-- speechd:flags -->` in a page
  becomes, at build time, a table of every flag of every `speechd` command, read from
  `speechd.cli.build_parser()` (the flag, its help text as `--help` prints it, the commands
  that take it) and `speechd.config.Settings` (its `SPEECHD_*` variable and default), after
  the settings' own rules (`speechd.config`'s docstring). A flag added to the CLI appears by
  itself; a page with the marker missing fails the build.
- The committed load-test results (`loadtest/results/`: reports, plots, printed benchmark
  output) are served as they are under `loadtest/results/`, so the load-test page links the
  real files and a link to one that is gone fails `mkdocs build --strict`.

`python scripts/mkdocs_hooks.py` prints the flags reference as the page gets it.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- speechd:flags -->"
MOUNTED = ("loadtest/results",)  # repository folders served as they are, same paths

__all__ = ["MARKER", "on_files", "on_page_markdown", "render_flags"]


def _commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each subcommand's name -> (its one-line help, its parser), in the CLI's order."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:  # argparse has no public way to walk its subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (helps.get(name, ""), sub)
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    formatter = parser._get_formatter()
    return _cell(formatter._expand_help(action))  # %(default)s and the like, as --help has it


def _default(action: argparse.Action, fields: dict[str, Any]) -> str:
    import msgspec

    from speechd.config import WORKER_KNOBS
    from speechd.worker import WorkerConfig

    field = fields.get(action.dest)
    if field is None:  # a flag outside Settings (speechd top's): argparse's own default
        if isinstance(action, argparse._StoreTrueAction):
            return "off"
        return "" if action.default is None else f"`{action.default}`"
    if field.default_factory in (dict, list, tuple, set):
        return ""
    if field.default_factory is not msgspec.NODEFAULT:
        doc = inspect.getdoc(field.default_factory) or ""
        return _cell(doc.rstrip("."))
    value = field.default
    if value is None and action.dest in WORKER_KNOBS:  # not given: the worker's own default
        value = getattr(WorkerConfig(), WORKER_KNOBS[action.dest])
    if value is None or value == ():
        return ""
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _field_docs() -> dict[str, str]:
    """`Settings`' attribute docstrings (the string under a field), read from its source."""
    import ast

    from speechd import config

    tree = ast.parse(inspect.getsource(config.Settings))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for field, after in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = _cell(after.value.value)
    return docs


def _env_name(field: str) -> str:
    """The `SPEECHD_*` variable `speechd.config` reads for a `Settings` field."""
    from speechd import config

    return config.ENV_PREFIX + config._ENV_NAMES.get(field, field.upper())


def render_flags() -> str:
    """The flags reference: a section per set of commands that share flags, a table each."""
    import msgspec

    from speechd import config
    from speechd.cli import build_parser
    from speechd.config import Settings

    fields = {field.name: field for field in msgspec.structs.fields(Settings)}
    commands = _commands(build_parser())
    rows: dict[str, dict[str, Any]] = {}  # flag -> its row, in first-seen order
    for name, (_, parser) in commands.items():
        for action in parser._actions:
            flags = [s for s in action.option_strings if s.startswith("--")]
            if not flags or isinstance(action, argparse._HelpAction):
                continue
            flag = flags[0]
            row = rows.setdefault(flag, {"commands": [], "action": action, "parser": parser})
            row["commands"].append(name)
    sections: dict[tuple[str, ...], list[str]] = {}
    for flag, row in rows.items():
        action, parser = row["action"], row["parser"]
        metavar = action.metavar or action.dest.upper()
        if action.choices:
            metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
        usage = flag if action.nargs == 0 else f"{flag} {metavar}"
        env = f"`{_env_name(action.dest)}`" if action.dest in fields else ""
        cells = [f"`{usage}`", env, _default(action, fields), _help(parser, action)]
        sections.setdefault(tuple(row["commands"]), []).append("| " + " | ".join(cells) + " |")
    out = [inspect.cleandoc(config.__doc__ or "").split("\n", 1)[1].strip(), ""]
    for names, lines in sections.items():
        title = ", ".join(f"`speechd {n}`" for n in names)
        out += [f"### {title}", ""]
        out += [f"- `speechd {n}`: {commands[n][0]}" for n in names]
        out += ["", "| flag | environment | default | what (`--help`) |", "|---|---|---|---|"]
        out += [*lines, ""]
    flagged = {row["action"].dest for row in rows.values()}
    env_only = [name for name in fields if name not in flagged]
    if env_only:
        docs = _field_docs()
        out += ["### Environment only", "", "| environment | default | what (`Settings`) |"]
        out.append("|---|---|---|")
        for name in env_only:
            default = _default(argparse.Action([], name), fields)
            out.append(f"| `{_env_name(name)}` | {default} | {docs.get(name, '')} |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "serving/flags.md":
        if MARKER not in markdown:
            raise RuntimeError(f"serving/flags.md lost its marker {MARKER}")
        return markdown.replace(MARKER, render_flags())
    return markdown


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for folder in MOUNTED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file():
                uri = path.relative_to(ROOT).as_posix()
                files.append(
                    File(uri, str(ROOT), config["site_dir"], config["use_directory_urls"])
                )
    return files


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(render_flags())
