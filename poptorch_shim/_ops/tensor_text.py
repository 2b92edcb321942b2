"""A tensor as ``poptorch.ipu_print_tensor`` prints it: Poplar's print format
options (summarised edges, digits, fixed or scientific floats, the brackets
and separator, lines wrapped at a width), written for the host's stdout."""
from __future__ import annotations

import torch

FLOAT_FORMATS = ("auto", "fixed", "scientific", "none")


def _number(value, is_float: bool, digits: int, style: str) -> str:
    if not is_float:
        return str(int(value))
    if style == "fixed":
        return f"{value:.{digits}f}"
    if style == "scientific":
        return f"{value:.{digits}e}"
    return repr(float(value))


def _style(tensor: torch.Tensor, float_format: str, digits: int) -> str:
    """The float style for the whole tensor: "auto" picks scientific where fixed
    would lose the values (very large or very small magnitudes)."""
    if float_format != "auto":
        return float_format
    if digits == 0:
        return "none"
    finite = tensor[torch.isfinite(tensor)].abs()
    nonzero = finite[finite > 0]
    if nonzero.numel() and (float(nonzero.max()) >= 1e8 or float(nonzero.min()) < 10 ** -digits):
        return "scientific"
    return "fixed"


def format_tensor(tensor: torch.Tensor, summarise_threshold: int = 1000, edge_items: int = 3,
                  max_line_width: int = 80, digits: int = 4, float_format: str = "auto",
                  separator: str = ", ", open_bracket: str = "(",
                  close_bracket: str = ")") -> str:
    """The text of ``tensor``'s values: nested brackets per dimension; only the
    ``edge_items`` first and last along each dimension (``...`` between) when it
    holds more than ``summarise_threshold`` elements (0: never summarised); lines
    wrapped after a separator at ``max_line_width`` (0: never wrapped)."""
    values = tensor.detach().cpu()
    is_float = values.is_floating_point()
    style = _style(values.float(), float_format, digits) if is_float else "none"
    summarise = 0 < summarise_threshold < values.numel()

    def text(part: torch.Tensor) -> str:
        if part.dim() == 0:
            return _number(part.item(), is_float, digits, style)
        size = part.shape[0]
        if summarise and size > 2 * edge_items:
            items = [text(part[i]) for i in range(edge_items)] + ["..."] + \
                    [text(part[i]) for i in range(size - edge_items, size)]
        else:
            items = [text(part[i]) for i in range(size)]
        return open_bracket + separator.join(items) + close_bracket

    whole = text(values)
    if max_line_width <= 0 or len(whole) <= max_line_width or not separator:
        return whole
    lines, line = [], ""
    pieces = whole.split(separator)
    for index, piece in enumerate(pieces):
        piece += separator if index < len(pieces) - 1 else ""
        if line and len(line) + len(piece.rstrip()) > max_line_width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    lines.append(line)
    return "\n".join(lines)
