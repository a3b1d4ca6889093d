#!/usr/bin/env python3
"""Every room (a Swift file in Sources/) has its tests where a newcomer looks: a test file named after it
(`<Room>Tests.swift`), or a row of docs/ARCHITECTURE.md's "Where a room's tests are" table naming the test
files that test it, or saying it has no logic of its own. The table is checked both ways: a row for a room
that no longer exists, or naming a test file that does not, fails too."""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent
sources = sorted((root / "Sources").rglob("*.swift"))
rooms = {p.stem: p for p in sources}
test_files = {p.name: p for p in (root / "Tests").rglob("*.swift")}
doc = (root / "docs" / "ARCHITECTURE.md").read_text()
section = doc.split("### Where a room's tests are", 1)
if len(section) < 2:
    sys.exit("docs/ARCHITECTURE.md has no \"### Where a room's tests are\" section")
rows = {}
for line in section[1].split("\n## ", 1)[0].splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 2 or not cells[0].startswith("`"):
        continue
    for room in re.findall(r"`([^`]+)`", cells[0]):
        rows[room] = cells[1]

problems = []
# A room's name says where its tests are: two files of one name would share one test file and one row.
for stem in sorted({p.stem for p in sources if sum(q.stem == p.stem for q in sources) > 1}):
    named = ", ".join(str(p.relative_to(root)) for p in sources if p.stem == stem)
    problems.append(f"{stem}: two rooms of one name ({named}); name each file after what it holds")
for room in sorted(rooms):
    if f"{room}Tests.swift" in test_files:
        if room in rows:
            problems.append(f"{room}: has {room}Tests.swift and a row in the table; keep one")
        continue
    if room not in rows:
        problems.append(f"{room} ({rooms[room].relative_to(root)}): no {room}Tests.swift and no row in the table")
for room, where in rows.items():
    if room not in rooms:
        problems.append(f"the table names {room}, which is not a file in Sources/")
    for named in re.findall(r"`([A-Za-z0-9+]+Tests(?:\.swift)?)`", where):
        name = named if named.endswith(".swift") else named + ".swift"
        if name not in test_files:
            problems.append(f"the row of {room} names {named}, which is not a file in Tests/")
    if not re.search(r"`[A-Za-z0-9+]+Tests(?:\.swift)?`", where) and "no logic of its own" not in where:
        problems.append(f"the row of {room} names no test file and does not say it has no logic of its own")
if problems:
    print("Rooms whose tests a newcomer cannot find (docs/ARCHITECTURE.md, \"Where a room's tests are\"):")
    print("\n".join("  " + p for p in problems))
    sys.exit(1)
named = sum(1 for r in rooms if f"{r}Tests.swift" in test_files)
print(f"{len(rooms)} rooms: {named} with a test file named after them, {len(rooms) - named} in the table")
