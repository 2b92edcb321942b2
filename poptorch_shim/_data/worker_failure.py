"""An exception raised in an ``AsynchronousDataAccessor`` worker, carried to
the host process and raised there again: the same exception type when it can
be rebuilt, with a message that says where it happened and holds the
worker's traceback (the traceback object itself cannot cross processes)."""
import dataclasses
import os
import pickle
import traceback


@dataclasses.dataclass(frozen=True)
class WorkerFailure:
    """An exception raised in the worker, in a form that always pickles."""
    pickled_type: bytes | None
    type_name: str
    where: str
    pid: int
    traceback_text: str

    @classmethod
    def capture(cls, error: BaseException, where: str) -> "WorkerFailure":
        try:
            pickled_type = pickle.dumps(type(error))
        except Exception:
            pickled_type = None  # a local class: re-raised as RuntimeError
        text = "".join(traceback.format_exception(
            type(error), error, error.__traceback__))
        return cls(pickled_type, type(error).__qualname__, where, os.getpid(),
                   text)

    @property
    def message(self) -> str:
        return (f"Caught {self.type_name} in the AsynchronousDataAccessor "
                f"worker process (pid {self.pid}) {self.where}.\nOriginal "
                f"{self.traceback_text[0].lower()}{self.traceback_text[1:]}")

    def to_exception(self) -> Exception:
        """The worker's exception type with the worker's message and
        traceback as its message, or a RuntimeError when that type cannot be
        rebuilt here."""
        message = self.message
        if self.pickled_type is not None:
            try:
                exc_type = pickle.loads(self.pickled_type)
                if isinstance(exc_type, type) and issubclass(exc_type, Exception):
                    error = exc_type(_Verbatim(message))
                    if message in str(error):
                        return error
            except Exception:
                pass  # a type that will not rebuild is reported as RuntimeError
        return RuntimeError(message)


class _Verbatim(str):
    """A message that stays readable in exceptions that ``repr`` their
    argument (``KeyError``)."""

    def __repr__(self) -> str:
        return str(self)
