"""The script of package interp/python's kernel tests.

Run as: python stack.py LIBPYFIX. It loads the fixture library, prints
"ready", waits for a line on stdin, then calls pyfix_hit from
outer -> middle -> inner: through ctypes.PyDLL (the GIL held) and
ctypes.CDLL (the GIL released), on the main thread and on a
threading.Thread; then through pyfix_call, which calls back into
Python (C -> Python -> C), and the callback calls pyfix_hit; then from
a generator. At each call it prints, as one JSON line, the stack
traceback.extract_stack() gives on the same line as the call, innermost
first, with each frame's qualified name. Then it prints "done" and
waits for a line before it exits, so that its memory can be read.
"""
import ctypes
import json
import sys
import threading
import traceback

held = ctypes.PyDLL(sys.argv[1])
released = ctypes.CDLL(sys.argv[1])


def qualnames():
    f, out = sys._getframe(1), []
    while f is not None:
        out.append(getattr(f.f_code, "co_qualname", f.f_code.co_name))
        f = f.f_back
    return out


def inner(lib, n):
    stack = traceback.extract_stack(); q = qualnames(); lib.pyfix_hit(n)  # noqa: E702 (one line: the same line number)
    frames = [[f.name, f.filename, f.lineno] for f in reversed(stack)]
    print(json.dumps({"n": n, "gil": lib is held, "thread": threading.current_thread().name,
                      "frames": frames, "qualnames": q}), flush=True)


def middle(lib, n):
    if n == -6:
        # A generator's frame (owned by the generator from 3.11).
        for _ in produce(lib, n):
            pass
        return
    if n < 0:
        # C -> Python -> C: pyfix_call calls back into Python, whose
        # callback calls pyfix_hit.
        lib.pyfix_call(CALLBACK(lambda x: callback(lib, x)), n)
        return
    inner(lib, n)


def produce(lib, n):
    inner(lib, n)
    yield n


def callback(lib, n):
    inner(lib, n)
    return 0


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


def outer(lib, n):
    middle(lib, n)


def calls(lib, n):
    outer(lib, n)


sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
calls(held, 1)
calls(released, 2)
for lib, n in ((held, 3), (released, 4)):
    t = threading.Thread(target=calls, args=(lib, n), name="worker")
    t.start()
    t.join()
calls(held, -5)
calls(held, -6)
sys.stdout.write("done\n")
sys.stdout.flush()
sys.stdin.readline()
