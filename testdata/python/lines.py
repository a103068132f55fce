"""Prints, for package interp/python's line table tests, every code
object of a sample module as one JSON line: its first line, its line
table (co_linetable from 3.10, co_lnotab before) in hex, and the line of
each instruction offset (in bytes, every 2) as CPython itself gives it
(co_lines() from 3.10, dis.findlinestarts before); 0 for no line."""
import dis
import json
import sys

SAMPLE = '''
def small(a):
    return a + 1


def branches(x):
    if x:
        y = 1
    else:
        y = 2
    for i in range(3):
        y += i
    while y > 10:
        y -= 1
    try:
        y = 1 / y
    except ZeroDivisionError:
        y = 0
    finally:
        y += 1
    return y


def far():
    a = 1
''' + "\n" * 300 + '''    b = 2
''' + "\n" * 70000 + '''    return (a,
            b)


class K:
    def method(self):
        return [i * i for i in range(10)
                if i % 2]

    async def coro(self):
        return lambda q: (q,
                          q)


def gen():
    yield 1
    yield 2
'''


def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)


def lines(co):
    n = len(co.co_code)
    out = [0] * (n // 2)
    if sys.version_info >= (3, 10):
        for start, end, line in co.co_lines():
            for off in range(start, min(end, n), 2):
                out[off // 2] = line or 0
    else:
        starts = list(dis.findlinestarts(co))
        cur, k = co.co_firstlineno, 0
        for off in range(0, n, 2):
            while k < len(starts) and starts[k][0] <= off:
                cur = starts[k][1]
                k += 1
            out[off // 2] = cur
    return out


top = compile(SAMPLE, "sample.py", "exec")
for co in codes(top):
    tab = co.co_linetable if sys.version_info >= (3, 10) else co.co_lnotab
    print(json.dumps({"name": co.co_name, "first": co.co_firstlineno, "table": tab.hex(), "lines": lines(co)}))
