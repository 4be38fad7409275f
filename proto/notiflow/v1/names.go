package notiflowv1

// The lower-case names of the enums, written by hand next to the generated
// code: they are stored (the sink's notifications rows, the dispatcher's
// done markers in Redis) and used as metric labels, so they must not follow
// a rename in the .proto file. names_test.go fails when a value has no name.

var statusNames = [...]string{
	Status_STATUS_UNSPECIFIED:  "unspecified",
	Status_STATUS_DELIVERED:    "delivered",
	Status_STATUS_FAILED:       "failed",
	Status_STATUS_DUPLICATE:    "duplicate",
	Status_STATUS_RATE_LIMITED: "rate_limited",
	Status_STATUS_CANCELLED:    "cancelled",
}

var channelNames = [...]string{
	Channel_CHANNEL_UNSPECIFIED: "unspecified",
	Channel_CHANNEL_WEBHOOK:     "webhook",
	Channel_CHANNEL_INBOX:       "inbox",
	Channel_CHANNEL_SIM:         "sim",
}

// Name returns the lower-case name of s ("delivered", "rate_limited"):
// "unspecified" for STATUS_UNSPECIFIED and for a value this build does not
// know.
func (s Status) Name() string { return nameOf(statusNames[:], s) }

// StatusByName returns the status whose Name is name. It is the inverse of
// Name for every status but STATUS_UNSPECIFIED: ok is false for
// "unspecified" and for any name that is not a status.
func StatusByName(name string) (s Status, ok bool) {
	return byName[Status](statusNames[:], name)
}

// Name returns the lower-case name of c ("webhook", "inbox", "sim"):
// "unspecified" for CHANNEL_UNSPECIFIED and for a value this build does
// not know.
func (c Channel) Name() string { return nameOf(channelNames[:], c) }

// ChannelByName returns the channel whose Name is name. It is the inverse
// of Name for every channel but CHANNEL_UNSPECIFIED: ok is false for
// "unspecified" and for any name that is not a channel.
func ChannelByName(name string) (c Channel, ok bool) {
	return byName[Channel](channelNames[:], name)
}

// nameOf returns names[v], or names[0] (the unspecified value's name) for
// a value outside the table.
func nameOf[E ~int32](names []string, v E) string {
	if v > 0 && int(v) < len(names) {
		return names[v]
	}
	return names[0]
}

// byName returns the value whose name is name, never the unspecified one.
func byName[E ~int32](names []string, name string) (E, bool) {
	for i := 1; i < len(names); i++ {
		if names[i] == name {
			return E(i), true
		}
	}
	return 0, false
}
