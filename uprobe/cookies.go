package uprobe

import "github.com/probekit/probekit/internal/features"

// CheckCookies returns nil if the kernel attaches uprobes with a BPF
// cookie that a program reads with bpf_get_attach_cookie (Linux 5.15),
// and otherwise an error wrapping ebpf.ErrNotSupported that names the
// feature and its release. A program that reads its cookie does not load
// without it (the verifier rejects the helper call): check first, and
// refuse with this error or fall back to what FunctionCookie's users do
// without cookies.
func CheckCookies() error {
	return features.Check(features.Cookie)
}
