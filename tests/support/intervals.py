"""The time a set of intervals covers, worked the plain way (sorted, one by one), for
tests that check what a host link's overlapping copies keep it busy."""


def covered_ps(starts, ends) -> int:
    """Picoseconds inside at least one of the intervals [start, end)."""
    total, reach = 0, None
    for start, end in sorted(zip(starts, ends)):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return int(total)
