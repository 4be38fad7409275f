// Package deploytest holds the offline checks of notiflow's deployment
// files. It has no code of its own outside tests.
package deploytest
