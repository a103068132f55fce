// params_cc: the C++ fixture of probekit's named arguments: a method,
// whose first parameter is the artificial `this`. Run as
//
//   params_cc N   N rounds; round r calls c.add(r, "tag") on a Counter
//                 whose base is 100, which returns base + r
#include <cstdlib>

struct Counter {
	long base;
	__attribute__((noipa)) long add(int v, const char *tag);
};

volatile long sink;

long Counter::add(int v, const char *tag)
{
	sink += tag[0];
	return base + v;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? std::atol(argv[1]) : 1;
	char tag[] = "tag";
	Counter c{100};

	for (long r = 0; r < rounds; r++)
		c.add(r, tag);
	return 0;
}
