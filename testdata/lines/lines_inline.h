/* Inlined from a header: its frames name this file. */
static inline __attribute__((always_inline)) int scale(int v)
{
	return v * 3 + (v >> 2);
}
