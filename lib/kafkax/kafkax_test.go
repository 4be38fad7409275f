package kafkax

import (
	"testing"
	"time"

	"github.com/notiflow/notiflow/lib/config"
)

// TestConfigDefaults checks Config's default tags load and validate, and
// that NewWriter's zero-value defaults are those tags.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	if err := config.FillZero(&c); err != nil {
		t.Fatalf("FillZero: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if c.WriteTimeout != 10*time.Second || c.MaxMessageBytes != 1_000_000 {
		t.Fatalf("defaults %+v", c)
	}
	w := NewWriter([]string{"127.0.0.1:1"}, WriterOptions{})
	defer w.Close()
	if w.WriteTimeout != c.WriteTimeout || w.BatchBytes != int64(c.MaxMessageBytes) {
		t.Errorf("NewWriter's zero-value defaults: WriteTimeout %s BatchBytes %d, want the tags' %s %d",
			w.WriteTimeout, w.BatchBytes, c.WriteTimeout, c.MaxMessageBytes)
	}
	w2 := NewWriter([]string{"127.0.0.1:1"}, WriterOptions{WriteTimeout: time.Second, MaxMessageBytes: 2048})
	defer w2.Close()
	if w2.WriteTimeout != time.Second || w2.BatchBytes != 2048 {
		t.Errorf("NewWriter ignores its options: %s %d", w2.WriteTimeout, w2.BatchBytes)
	}
}
