package record

import (
	"encoding/binary"
	"testing"
)

// aggKey is struct agg_key: the map's key size is its size.
func TestAggKeyLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["keyed"]
	if m == nil || int(m.KeySize) != binary.Size(aggKey{}) || m.MaxEntries != MaxKeyed {
		t.Fatalf("keyed map %+v, want key size %d and %d entries", m, binary.Size(aggKey{}), MaxKeyed)
	}
	if m.KeySize != 136 || aggKeySize != 136 {
		t.Errorf("key size %d (aggKeySize %d), want 136", m.KeySize, aggKeySize)
	}
}

// filterTerm is struct filter_term.
func TestFilterTermLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	v := spec.Variables[TermsName]
	if want := binary.Size([MaxFilterTerms]filterTerm{}); v == nil || int(v.Size()) != want {
		t.Fatalf("%s %+v, want %d bytes", TermsName, v, want)
	}
}
