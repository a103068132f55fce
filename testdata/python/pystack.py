"""The script of package tracer's Python stack tests.

Run as: python pystack.py LIBPYFIX OUT [SECONDS]. It calls pyfix_hit(n)
from outer -> middle -> inner, once per way of calling: through
ctypes.PyDLL (the GIL held) and ctypes.CDLL (the GIL released), on the
main thread and on a threading.Thread, and through pyfix_call, which
calls back into Python (C -> Python -> C) whose callback calls
pyfix_hit. Before each call it writes to OUT one JSON line: n and the
stack traceback.extract_stack() gives on the call's own line, innermost
first, each frame with its code's qualified name. With SECONDS it
repeats the calls (n the same) for that long.
"""
import ctypes
import json
import sys
import threading
import time
import traceback

held = ctypes.PyDLL(sys.argv[1])
released = ctypes.CDLL(sys.argv[1])
out = open(sys.argv[2], "w")
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0
written = set()


def record(n, stack, frame):
    if n in written:
        return
    written.add(n)
    names = []
    while frame is not None:
        names.append(getattr(frame.f_code, "co_qualname", frame.f_code.co_name))
        frame = frame.f_back
    frames = [[q, f.filename, f.lineno] for q, f in zip(names, reversed(stack))]
    out.write(json.dumps({"n": n, "thread": threading.current_thread().name, "frames": frames}) + "\n")
    out.flush()


def inner(lib, n):
    record(n, traceback.extract_stack(), sys._getframe()); lib.pyfix_hit(n)  # noqa: E702 (one line)


def middle(lib, n, back):
    if back:
        lib.pyfix_call(CALLBACK(lambda x: callback(lib, x)), n)
        return
    inner(lib, n)


def callback(lib, n):
    inner(lib, n)
    return 0


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


def outer(lib, n, back=False):
    middle(lib, n, back)


def all_calls():
    outer(held, 1)
    outer(released, 2)
    for lib, n in ((held, 3), (released, 4)):
        t = threading.Thread(target=outer, args=(lib, n), name="worker")
        t.start()
        t.join()
    outer(held, 5, True)
    outer(released, 6, True)


end = time.monotonic() + seconds
while True:
    all_calls()
    if time.monotonic() >= end:
        break
out.close()
