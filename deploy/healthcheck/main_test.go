package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.Error(w, "draining", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{name: "ready", give: srv.URL + "/readyz"},
		{name: "not ready", give: srv.URL + "/other", wantErr: "503"},
		{name: "timeout", give: srv.URL + "/slow", wantErr: "deadline exceeded"},
		{name: "refused", give: "http://127.0.0.1:1/readyz", wantErr: "refused"},
		{name: "bad url", give: "::", wantErr: "build request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := check(ctx, http.DefaultClient, tt.give)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("check(%s) = %v, want nil", tt.give, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("check(%s) = %v, want an error containing %q", tt.give, err, tt.wantErr)
			}
		})
	}
}
