"""PopTorch's compile hooks as a script sees them: ``poptorch.registerPreCompileHook``
and ``registerPostCompileHook``.

The registries they add to, and the model being compiled while the hooks run,
are in the core package (``_core/compile_hooks.py``), where the executor that
runs the hooks and the sweep that captures a model through them both find them.
"""
from poptorch_shim._core.compile_hooks import registerPostCompileHook, registerPreCompileHook

__all__ = ["registerPostCompileHook", "registerPreCompileHook"]
