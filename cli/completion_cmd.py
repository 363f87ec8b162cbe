"""`smartune completion SHELL`: print a completion script for bash, zsh, tcsh, fish or PowerShell.

The script is generated from the parser itself by shtab, so it is static: pressing TAB runs no Python
(argcomplete, the alternative, starts the program on every TAB). How to install it: INSTALL below, also
shown by `smartune completion --help`.
"""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")  # shtab.SUPPORTED_SHELLS
INSTALL = """install:
  bash  smartune completion bash > ~/.local/share/bash-completion/completions/smartune
        (or: eval "$(smartune completion bash)" in ~/.bashrc)
  zsh   smartune completion zsh > ~/.zfunc/_smartune   (with fpath=(~/.zfunc $fpath) before compinit)
  tcsh  eval `smartune completion tcsh`
  fish  smartune completion fish > ~/.config/fish/completions/smartune.fish
  powershell  smartune completion powershell | Out-String | Invoke-Expression   (in $PROFILE)"""
# What shtab.FILE and shtab.DIRECTORY are (tests/cli checks it): the parser is built without importing shtab.
FILE = {
    "bash": "_shtab_compgen_files",
    "zsh": "_files",
    "tcsh": "f",
    "fish": "(__fish_complete_path (commandline -ct))",
    "powershell": "_shtab_powershell_compgen_files",
}
DIRECTORY = {
    "bash": "_shtab_compgen_dirs",
    "zsh": "_files -/",
    "tcsh": "d",
    "fish": "(__fish_complete_directories)",
    "powershell": "_shtab_powershell_compgen_dirs",
}


def completes(action: argparse.Action, kind: dict[str, str]) -> argparse.Action:
    """Mark an argument as a file (FILE) or a folder (DIRECTORY) for the completion script."""
    action.complete = kind  # type: ignore[attr-defined]  # read by shtab
    return action


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh, fish, powershell)",
        description="Print a shell completion script for every subcommand and option.",
        epilog=INSTALL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(handler=completion)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    try:
        import shtab
    except ImportError:
        raise ValueError("completion scripts need shtab: pip install shtab") from None
    text: Any = shtab.complete(parser, shell=shell)
    return str(text)


def completion(args: argparse.Namespace) -> int:
    print(script(args.root_parser, args.shell))  # the whole command line, set by cli.main.build_parser
    return 0
