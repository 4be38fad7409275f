package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Brokers []string `env:"T_BROKERS" default:"127.0.0.1:9092"`
}

type sample struct {
	Name    string        `env:"T_NAME" default:"svc"`
	Workers int           `env:"T_WORKERS" default:"64"`
	Wait    time.Duration `env:"T_WAIT" default:"1s"`
	Ratio   float64       `env:"T_RATIO"`
	Debug   bool          `env:"T_DEBUG"`
	Kafka   inner
	// unexported fields are never touched, tagged or not
	skipped int `env:"T_SKIPPED"`
}

func TestLoadFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		give    map[string]string
		want    sample
		wantErr []string
	}{
		{
			name: "defaults",
			give: map[string]string{},
			want: sample{Name: "svc", Workers: 64, Wait: time.Second, Kafka: inner{Brokers: []string{"127.0.0.1:9092"}}},
		},
		{
			name: "values",
			give: map[string]string{"T_NAME": "x", "T_WORKERS": "8", "T_WAIT": "250ms", "T_RATIO": "0.5", "T_DEBUG": "true", "T_BROKERS": "a:1, b:2", "T_SKIPPED": "9"},
			want: sample{Name: "x", Workers: 8, Wait: 250 * time.Millisecond, Ratio: 0.5, Debug: true, Kafka: inner{Brokers: []string{"a:1", "b:2"}}},
		},
		{
			name:    "bad values name their variables",
			give:    map[string]string{"T_WORKERS": "many", "T_WAIT": "5"},
			wantErr: []string{`T_WORKERS="many": not an integer`, `T_WAIT="5": not a duration`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got sample
			err := LoadFrom(MapLookup(tt.give), &got)
			_ = got.skipped
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want error, got nil")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadFrom: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestVars(t *testing.T) {
	t.Parallel()
	got := Vars(&sample{})
	want := []string{"T_NAME", "T_WORKERS", "T_WAIT", "T_RATIO", "T_DEBUG", "T_BROKERS"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Vars = %v, want %v", got, want)
	}
}

func TestFillZero(t *testing.T) {
	t.Parallel()
	got := sample{Workers: 8, Ratio: 0.5}
	if err := FillZero(&got); err != nil {
		t.Fatalf("FillZero: %v", err)
	}
	want := sample{Name: "svc", Workers: 8, Wait: time.Second, Ratio: 0.5, Kafka: inner{Brokers: []string{"127.0.0.1:9092"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	var bad struct {
		N int `env:"T_N" default:"many"`
	}
	if err := FillZero(&bad); err == nil || !strings.Contains(err.Error(), `T_N default "many"`) {
		t.Errorf("FillZero with a bad tag = %v", err)
	}
	if err := FillZero(sample{}); err == nil {
		t.Error("FillZero of a struct value: nil error")
	}
}

func TestLoadAs(t *testing.T) {
	t.Parallel()
	got, err := LoadAs[sample](MapLookup(map[string]string{"T_WORKERS": "8"}))
	if err != nil || got.Workers != 8 || got.Name != "svc" {
		t.Fatalf("LoadAs = %+v, %v", got, err)
	}
	if _, err := LoadAs[sample](MapLookup(map[string]string{"T_WORKERS": "many"})); err == nil || !strings.Contains(err.Error(), "T_WORKERS") {
		t.Fatalf("LoadAs with a bad value: %v", err)
	}
}
