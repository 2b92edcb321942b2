"""The machinery behind ``poptorch.Options``: the typed store every setting goes
through, the option groups, tensor locations and loading options from files."""
