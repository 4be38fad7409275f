package benchreport

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestLagPointRoundTrip(t *testing.T) {
	t.Parallel()
	give := Series{PersistedPerSecond: []int64{1, 2}, Lag: []LagPoint{{T: 1.5, Lag: map[string]int64{"nf-sink": 7, "nf-dispatcher": 3}}}}
	b, err := json.Marshal(give)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"persistedPerSecond":[1,2],"lag":[{"t":1.5,"nf-dispatcher":3,"nf-sink":7}]}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	var got Series
	if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, give) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
}
