#!/usr/bin/env python3
"""Splits a CPU profile of MariaDB by what each sample was doing.

Reads `perf script -F ip,sym` output (one call stack per sample, blank
lines between samples) on standard input and prints, for each kind of
work, its share of the samples and their number (bench/README.md, "What
MariaDB spends"). Record during a run, from the repository's root:

    perf record -F 499 -g -p "$(cat .deps/mariadb/mariadbd.pid)" \
        -o mariadb.perf -- sleep 9
    perf script -i mariadb.perf -F ip,sym | python3 bench/tools/mariadb-profile.py

Frames are matched by the start of their function's name. A sample
counts as "prepared" when its stack holds mysqld_stmt_execute
(statements run through the binary protocol: the sink's full batches),
split by the first entry of this list that a frame of the stack names:
handler::ha_write_row (InnoDB writing the rows), fill_record (filling
rows from the parameters), Prepared_statement::set_parameters (binding
them), trans_commit (the commit; trans_commit_stmt for an autocommit
statement), else "other". It counts as "text" when the stack holds
mysql_parse (interpolated statements), split the same way by
mysql_insert, mysql_update, mysql_delete, mysql_select, trans_commit,
parse_sql (parsing the statement), else "other"; statements that run
through the join code (multi-table UPDATE and DELETE) count as "select".
Stacks of InnoDB's thread pool (tpool::) are "background"; the rest
"other".
"""

import collections
import sys

PREPARED = [
    ("write rows", "handler::ha_write_row"),
    ("fill rows", "fill_record"),
    ("bind parameters", "Prepared_statement::set_parameters"),
    ("commit", "trans_commit"),
]
TEXT = [
    ("insert", "mysql_insert"),
    ("update", "mysql_update"),
    ("delete", "mysql_delete"),
    ("select", "mysql_select"),
    ("commit", "trans_commit"),
    ("parse", "parse_sql"),
]


def frames(sample):
    """Returns the function names of one sample's stack, leaf first."""
    out = []
    for line in sample.splitlines():
        parts = line.split(None, 1)
        if parts:
            out.append(parts[1] if len(parts) > 1 else parts[0])
    return out


def holds(stack, prefix):
    """Reports whether a frame of stack names a function starting with prefix."""
    return any(f.startswith(prefix) for f in stack)


def classify(stack):
    """Returns the kind of work of one sample's stack."""
    for top, marker, parts in (("prepared", "mysqld_stmt_execute", PREPARED),
                               ("text", "mysql_parse", TEXT)):
        if holds(stack, marker):
            for label, name in parts:
                if holds(stack, name):
                    return top + ": " + label
            return top + ": other"
    if holds(stack, "tpool::"):
        return "background"
    return "other"


def main():
    counts = collections.Counter()
    for sample in sys.stdin.read().split("\n\n"):
        stack = frames(sample)
        if stack:
            counts[classify(stack)] += 1
    total = sum(counts.values())
    if total == 0:
        sys.exit("mariadb-profile: no samples on standard input")
    print(f"{total} samples")
    for kind in sorted(counts, key=lambda k: (k.split(":")[0], -counts[k])):
        print(f"{100 * counts[kind] / total:5.1f} %  {counts[kind]:6d}  {kind}")


if __name__ == "__main__":
    main()
