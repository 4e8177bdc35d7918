package schedule

import "errors"

// ErrInvalid is wrapped by every error about bad input (a bad cron
// expression, an unknown zone, a negative horizon…), so an API layer can
// answer INVALID_ARGUMENT with errors.Is and name the field with
// errors.As(*InvalidError).
var ErrInvalid = errors.New("invalid schedule")

// InvalidError says which input is wrong and why.
type InvalidError struct {
	Field  string // schedule, time_zone, window_layout, window_shift_days, horizon, starting_deadline, max
	Reason string
}

func (e *InvalidError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }
