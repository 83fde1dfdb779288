"""Text and flag options without pydantic.

typer 0.29 coerces option values (an unset one included) through a pydantic ``TypeAdapter``:
importing pydantic and building the adapters costs about 0.1 s of CPU on every run, a third of
what ``list`` may take. A text option's value arrives from the command line as ``str`` and a
flag's as ``bool``, which those adapters return unchanged, so :func:`install` gives text and flag
options (``--help`` among them, which typer creates as it parses) a pass-through for exactly
those values and leaves every other value, and every other option (numbers, paths, choices,
custom parsers), to typer. A typer without this layer (options went through click's types before
0.29) is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer.core import _TyperParameter
except ImportError:  # an older typer: no pydantic on the way
    RuntimeParam = _TyperParameter = None


def install() -> bool:
    """Route plain text and flag options through the pass-through in this process; False if this typer
    has no adapter layer to avoid."""
    if RuntimeParam is None or not hasattr(_TyperParameter, "get_runtime_param"):
        return False
    if getattr(_TyperParameter.get_runtime_param, "_maint_plain", False):
        return True
    typer_runtime_param = _TyperParameter.get_runtime_param

    def get_runtime_param(self: Any) -> Any:
        desc = self.type_descriptor
        if (getattr(self, "_runtime_param", False) is None and desc.annotation in (str, bool)
                and desc.file_annotation is None and desc.parameter_info.parser is None and not desc.is_path):
            self._runtime_param = _Plain(parameter_info=desc.parameter_info, annotation=desc.annotation)
        return typer_runtime_param(self)

    get_runtime_param._maint_plain = True
    _TyperParameter.get_runtime_param = get_runtime_param
    return True


if RuntimeParam is not None:
    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is self.annotation:
                return value
            return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)
