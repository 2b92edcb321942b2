"""The machinery of PopTorch's operators (``poptorch.ops``): a tensor printed as
``ipu_print_tensor`` prints it, and the custom operators ``custom_op`` runs,
PopTorch's own and the user's."""
