package adapters

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// firstPipelineErr returns err (the pipeline's own failure) or else the
// first error among cmds; redis.Nil (a conditional write that did not
// apply, such as one that would lower a version) is not an error.
func firstPipelineErr(cmds []redis.Cmder, err error) error {
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	return nil
}
