package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CPUProfiles takes a CPU profile of every proc at once, over d, from
// their /debug/pprof/profile (the services serve it with NOTIFLOW_PPROF=true;
// token is the API's bearer token, which the scheduler and the sink ask
// for), and writes each to dir/<proc name>.pprof. It returns the files
// written and an error naming every proc whose profile failed.
func CPUProfiles(ctx context.Context, procs []*Proc, token string, d time.Duration, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the profile directory: %w", err)
	}
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	var (
		mu    sync.Mutex
		files []string
		errs  []error
		wg    sync.WaitGroup
	)
	for _, p := range procs {
		wg.Go(func() {
			path := filepath.Join(dir, p.Name+".pprof")
			err := cpuProfile(ctx, "http://"+p.Addr, token, secs, path)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("profile %s: %w", p.Name, err))
				return
			}
			files = append(files, path)
		})
	}
	wg.Wait()
	return files, errors.Join(errs...)
}

// cpuProfile fetches one CPU profile of secs seconds from base into path.
func cpuProfile(ctx context.Context, base, token string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
