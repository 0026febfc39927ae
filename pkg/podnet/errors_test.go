package podnet

import "errors"

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }
