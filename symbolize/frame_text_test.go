package symbolize

import "testing"

// Frame's text line: an inlined frame is marked whether or not its
// function has a name; an outermost one gives its offset.
func TestFrameText(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Address: 0x1234, Function: "inner", Inlined: true, Object: "/bin/p", File: "p.c", Line: 3}, "0x1234 inner (inlined) (/bin/p) p.c:3"},
		{Frame{Address: 0x1234, Inlined: true, Object: "/bin/p", File: "p.c", Line: 6}, "0x1234 ?? (inlined) (/bin/p) p.c:6"},
		{Frame{Address: 0x1234, Function: "outer", Offset: 0x14, Object: "/bin/p", File: "p.c", Line: 11}, "0x1234 outer+0x14 (/bin/p) p.c:11"},
		{Frame{Address: 0x1234}, "0x1234 ??"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}
