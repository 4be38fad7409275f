package notiflowv1

import (
	"strings"
	"testing"
)

// TestStatusNames covers every value the generated code declares, so a
// status added to the .proto file without a name here fails.
func TestStatusNames(t *testing.T) {
	t.Parallel()
	want := map[Status]string{
		Status_STATUS_UNSPECIFIED:  "unspecified",
		Status_STATUS_DELIVERED:    "delivered",
		Status_STATUS_FAILED:       "failed",
		Status_STATUS_DUPLICATE:    "duplicate",
		Status_STATUS_RATE_LIMITED: "rate_limited",
		Status_STATUS_CANCELLED:    "cancelled",
	}
	checkNames(t, Status_name, want, Status.Name, StatusByName)
}

// TestChannelNames covers every value the generated code declares, so a
// channel added to the .proto file without a name here fails.
func TestChannelNames(t *testing.T) {
	t.Parallel()
	want := map[Channel]string{
		Channel_CHANNEL_UNSPECIFIED: "unspecified",
		Channel_CHANNEL_WEBHOOK:     "webhook",
		Channel_CHANNEL_INBOX:       "inbox",
		Channel_CHANNEL_SIM:         "sim",
	}
	checkNames(t, Channel_name, want, Channel.Name, ChannelByName)
}

func checkNames[E ~int32](t *testing.T, declared map[int32]string, want map[E]string, name func(E) string, byName func(string) (E, bool)) {
	t.Helper()
	if len(want) != len(declared) {
		t.Errorf("the table names %d values, the .proto declares %d: %v", len(want), len(declared), declared)
	}
	seen := map[string]E{}
	for n, protoName := range declared {
		v := E(n)
		got := name(v)
		if w, ok := want[v]; !ok || got != w {
			t.Errorf("%s.Name() = %q, want %q", protoName, got, w)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share the name %q", protoName, declared[int32(other)], got)
		}
		seen[got] = v
		back, ok := byName(got)
		switch {
		case n == 0 && ok:
			t.Errorf("ByName(%q) = %v, true; the unspecified value has no name to parse", got, back)
		case n != 0 && (!ok || back != v):
			t.Errorf("ByName(%q) = %v, %v; want %s, true", got, back, ok, protoName)
		}
		// The name is the enum's suffix in lower case today; the table
		// keeps it when the .proto is renamed, so this only guards typos.
		if n != 0 && !strings.HasSuffix(strings.ToLower(protoName), "_"+got) {
			t.Errorf("%s is named %q", protoName, got)
		}
	}
	unknown := E(len(declared) + 10)
	if got := name(unknown); got != "unspecified" {
		t.Errorf("Name of the unknown value %d = %q, want unspecified", unknown, got)
	}
	if got := name(E(-1)); got != "unspecified" {
		t.Errorf("Name of -1 = %q, want unspecified", got)
	}
	for _, s := range []string{"", "unspecified", "DELIVERED", "Webhook", "nope"} {
		if v, ok := byName(s); ok {
			t.Errorf("ByName(%q) = %v, true; want false", s, v)
		}
	}
}
