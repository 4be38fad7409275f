package simsend

import "testing"

func TestFieldRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target uint64
		us     int64
		want   string
	}{
		{7, 1773046800000123, "7:1773046800000123"},
		{18446744073709551615, 0, "18446744073709551615:0"},
		{1, -5, "1:-5"},
	}
	for _, tt := range tests {
		f := Field(tt.target, tt.us)
		if f != tt.want {
			t.Errorf("Field(%d, %d) = %q, want %q", tt.target, tt.us, f, tt.want)
		}
		target, us, err := ParseField(f)
		if err != nil || target != tt.target || us != tt.us {
			t.Errorf("ParseField(%q) = %d, %d, %v", f, target, us, err)
		}
	}
}

func TestParseFieldRejectsOtherForms(t *testing.T) {
	t.Parallel()
	for _, give := range []string{"", "garbage", "7", "7:", ":5", "x:5", "7:y", "-1:5", "7:5:9"} {
		if _, _, err := ParseField(give); err == nil {
			t.Errorf("ParseField(%q): no error", give)
		}
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	if got := Key("nf:", "run-1"); got != "nf:sim:sends:run-1" {
		t.Fatalf("Key = %q", got)
	}
}
