#!/usr/bin/env python3
"""Profile a CSV file: report.py CSV OUTDIR [--delimiter D] [--title T]."""

import argparse
import csv
import html
import json
import os
import statistics
import sys
from collections import Counter


def to_number(text):
    try:
        return float(text.replace(",", "")) if text.strip() else None
    except ValueError:
        return None


def profile(rows, header):
    columns = []
    for index, name in enumerate(header):
        values = [row[index].strip() if index < len(row) else "" for row in rows]
        present = [v for v in values if v]
        numbers = [to_number(v) for v in present]
        column = {"name": name, "missing": len(values) - len(present)}
        if present and all(n is not None for n in numbers):
            column.update(
                type="numeric",
                min=min(numbers),
                max=max(numbers),
                mean=round(statistics.fmean(numbers), 6),
            )
        else:
            column.update(type="text", top=Counter(present).most_common(3))
        columns.append(column)
    return columns


def bar_chart(labels, values, title):
    width, bar_h, gap, left = 640, 22, 6, 160
    height = 40 + len(values) * (bar_h + gap)
    peak = max((abs(v) for v in values), default=1) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="14">{html.escape(title)}</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, values)):
        y = 32 + i * (bar_h + gap)
        w = int((width - left - 20) * abs(value) / peak)
        parts.append(f'<text x="10" y="{y + 15}">{html.escape(str(label))[:24]}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w}" height="{bar_h}" fill="#4a78c2"/>')
        parts.append(f'<text x="{left + w + 4}" y="{y + 15}">{value:g}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv")
    parser.add_argument("outdir")
    parser.add_argument("--delimiter", default=",")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    with open(args.csv, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=args.delimiter)
        try:
            header = next(reader)
        except StopIteration:
            print("the CSV file is empty", file=sys.stderr)
            return 1
        rows = [row for row in reader if any(cell.strip() for cell in row)]

    title = args.title or os.path.basename(args.csv)
    columns = profile(rows, header)
    os.makedirs(args.outdir, exist_ok=True)

    summary = {"title": title, "rows": len(rows), "columns": columns}
    with open(os.path.join(args.outdir, "summary.json"), "w", encoding="utf-8") as out:
        json.dump(summary, out, indent=2)

    lines = [f"# {title}", "", f"{len(rows)} rows, {len(header)} columns.", ""]
    lines += ["| column | type | missing | profile |", "|---|---|---|---|"]
    for col in columns:
        if col["type"] == "numeric":
            detail = f"min {col['min']:g}, max {col['max']:g}, mean {col['mean']:g}"
        else:
            detail = ", ".join(f"{value} ({count})" for value, count in col["top"])
        lines.append(f"| {col['name']} | {col['type']} | {col['missing']} | {detail} |")
    with open(os.path.join(args.outdir, "report.md"), "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")

    numeric = next((i for i, c in enumerate(columns) if c["type"] == "numeric"), None)
    if numeric is not None:
        text = next((i for i, c in enumerate(columns) if c["type"] == "text"), None)
        values = [to_number(r[numeric]) or 0.0 for r in rows[:30] if numeric < len(r)]
        labels = [r[text] if text is not None and text < len(r) else str(i + 1) for i, r in enumerate(rows[:30])]
        with open(os.path.join(args.outdir, "chart.svg"), "w", encoding="utf-8") as out:
            out.write(bar_chart(labels, values, f"{title}: {header[numeric]}"))

    print(f"profiled {len(rows)} rows x {len(header)} columns into {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
