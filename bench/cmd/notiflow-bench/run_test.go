package main

import (
	"strings"
	"testing"
)

// TestValidateFloorOrder checks that -floor-order takes its three orders
// and refuses anything else, naming the setting.
func TestValidateFloorOrder(t *testing.T) {
	base := options{Notifications: 10, Recipients: 1, Partitions: 1, Dispatchers: 1, Channel: "sim"}
	for _, order := range []string{"key", "arrival", "random"} {
		o := base
		o.FloorOrder = order
		if err := o.validate(); err != nil {
			t.Errorf("floor order %q: %v", order, err)
		}
	}
	for _, order := range []string{"", "sorted", "KEY"} {
		o := base
		o.FloorOrder = order
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), "floor order") {
			t.Errorf("floor order %q: err %v, want one naming the floor order", order, err)
		}
	}
}
