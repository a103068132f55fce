// DWARF line tables and inlined frames of C++: a method and a template
// inlined into a function in a namespace, built with -g -O2 (DWARF 4 and
// 5) by build.sh.
#include <cstdio>
#include <cstdlib>

namespace shapes {

volatile int sink;

__attribute__((noinline)) int record(int v)
{
	sink = v;
	return v ^ 5;
}

struct Square {
	int side;
	inline __attribute__((always_inline)) int area() const
	{
		return record(side * side);
	}
};

template <typename T>
inline __attribute__((always_inline)) int twice(const T &s)
{
	return s.area() + record(2);
}

__attribute__((noinline)) int measure(int side)
{
	Square s{side};
	return twice(s) + 1;
}

} // namespace shapes

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 3;
	std::printf("%d\n", shapes::measure(n));
	return 0;
}
