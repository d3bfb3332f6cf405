"""Builds the Replay autoscheduler (replay_autoscheduler.cpp) around schedule headers.

The plugin is compiled around a table file that includes the headers and defines
HKFAC_REPLAY_ENTRIES as {"name", apply_function} pairs; this module writes that table and
compiles the plugin, for bench_schedules.py --replay and apps/tools/retime_samples.py alike.
Python standard library only.
"""
import collections
import os
import re
import subprocess

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_autoscheduler.cpp")

# The function a header printed by the generator's -e schedule defines to apply its schedule.
APPLY = re.compile(r"inline\s+void\s+(\w+)\s*\(")

# returncode 0: plugin is built; output is the compiler's stdout and stderr together.
Build = collections.namedtuple("Build", "plugin returncode output")


def apply_function(text):
    """The apply function a schedule header's text defines, or None."""
    m = APPLY.search(text)
    return m.group(1) if m else None


def write_table(path, entries):
    """The table file for (header path, apply function name) entries."""
    with open(path, "w") as f:
        for header, _ in entries:
            f.write(f'#include "{header}"\n')
        f.write("#define HKFAC_REPLAY_ENTRIES " +
                ", ".join(f'{{"{name}", {name}}}' for _, name in entries) + "\n")


def compile_command(cxx, include_dirs, table, plugin):
    return ([cxx, "-O1", "-std=c++17", "-shared", "-fPIC"] + [f"-I{d}" for d in include_dirs] +
            [f'-DHKFAC_REPLAY_TABLE="{table}"', SOURCE, "-o", plugin])


def build(cxx, include_dirs, entries, out_dir, timeout):
    """Writes out_dir/replay_table.h for entries and compiles out_dir/libreplay.so around it.
    A compile past timeout raises subprocess.TimeoutExpired: each caller reports it its own way."""
    table = os.path.join(out_dir, "replay_table.h")
    plugin = os.path.join(out_dir, "libreplay.so")
    write_table(table, entries)
    proc = subprocess.run(compile_command(cxx, include_dirs, table, plugin),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=timeout)
    return Build(plugin, proc.returncode, proc.stdout)
