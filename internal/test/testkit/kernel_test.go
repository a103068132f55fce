package testkit

import "testing"

func TestParseKernelVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want KernelVersion
	}{
		{"5.10.0-32-amd64", KernelVersion{5, 10, 0}},
		{"6.12.117+deb13-amd64", KernelVersion{6, 12, 117}},
		{"6.18", KernelVersion{6, 18, 0}},
		{"6.1.176", KernelVersion{6, 1, 176}},
	} {
		got, err := ParseKernelVersion(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseKernelVersion(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "6", "x.y", "6.1.2.3", "-1"} {
		if v, err := ParseKernelVersion(bad); err == nil {
			t.Errorf("ParseKernelVersion(%q) = %v, want an error", bad, v)
		}
	}
}

func TestKernelVersionLess(t *testing.T) {
	v := func(s string) KernelVersion {
		k, err := ParseKernelVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if !v("5.10.0").Less(v("5.15")) || v("5.15").Less(v("5.15.0")) || v("6.1.9").Less(v("6.1.1")) || !v("6.1.9").Less(v("6.12")) {
		t.Error("Less disagrees with version order")
	}
	if _, err := RunningKernel(); err != nil {
		t.Fatal(err)
	}
}
