package main

import (
	"testing"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/test/testkit"
)

// needFuncCookie skips t before Linux 5.15: probekit trace refuses
// function probes (uprobe:, uretprobe:) there, as it tells their hits
// apart by BPF cookie.
func needFuncCookie(t *testing.T) {
	t.Helper()
	ok, err := features.Have(features.Cookie)
	testkit.NeedFeature(t, ok, err, features.Cookie.Since(), "function probes need "+features.Cookie.String())
}
