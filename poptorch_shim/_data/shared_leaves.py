"""Passing tensors that are already in shared memory from the
``AsynchronousDataAccessor`` worker to its host without copying them: the
worker sends each tensor's shape and its storage's file descriptor over their
Unix socket pipe (``SCM_RIGHTS``), the host maps the same memory.

The descriptors travel inside the socket, so they reach the host even if the
worker exits right after sending them, and no shared-memory file is left
behind: a storage shared by descriptor has no name.
"""
import dataclasses
import os
import socket
from multiprocessing import reduction

import torch


@dataclasses.dataclass(frozen=True)
class TensorShape:
    """What the host needs, besides the memory, to rebuild a passed tensor."""
    storage_nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int


def send(conn, sock: socket.socket, header: tuple,
         tensors: dict[int, torch.Tensor]) -> None:
    """Send ``header + (shapes,)`` as one message on ``conn``, then the
    descriptors of the tensors' storages on ``sock``, the same socket."""
    shapes, descriptors = {}, []
    for index, tensor in tensors.items():
        # The descriptor the storage already has when it came from another
        # process by descriptor; else its bytes move to a new shared file.
        descriptor, nbytes = tensor.untyped_storage()._share_fd_cpu_()
        descriptors.append(descriptor)
        shapes[index] = TensorShape(nbytes, tensor.dtype, tuple(tensor.shape),
                                    tensor.stride(), tensor.storage_offset())
    conn.send(header + (shapes,))
    reduction.sendfds(sock, descriptors)


def receive(sock: socket.socket,
            shapes: dict[int, TensorShape]) -> dict[int, torch.Tensor]:
    """Receive the descriptors that follow a message from :func:`send` and
    rebuild its tensors over the shared memory."""
    descriptors = reduction.recvfds(sock, len(shapes))
    tensors = {}
    try:
        for (index, shape), descriptor in zip(shapes.items(), descriptors):
            storage = torch.UntypedStorage._new_shared_fd_cpu(
                descriptor, shape.storage_nbytes)
            tensors[index] = torch.empty(0, dtype=shape.dtype).set_(
                storage, shape.storage_offset, shape.shape, shape.stride)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)  # the storage keeps its own duplicate
    return tensors


def socket_of(conn) -> socket.socket:
    """A socket object over the same socket as the pipe end ``conn``."""
    return socket.socket(fileno=os.dup(conn.fileno()))
