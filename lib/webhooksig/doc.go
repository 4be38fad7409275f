// Package webhooksig is the one owner of how notiflow signs webhooks to the
// Standard Webhooks specification (https://www.standardwebhooks.com) and of
// where a target's signing secrets live in Redis.
//
// A secret is "whsec_" followed by the standard base64 of its key bytes;
// the key bytes are what HMAC-SHA256 uses. A signature is
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)), and
// the webhook-signature header carries one signature per valid secret,
// separated by spaces, so that a receiver holding any one of them verifies.
//
// The scheduler owns the secrets (its MySQL table webhook_secrets) and
// writes each target's Record to Redis under RedisKey with Store; the
// dispatcher reads it with Load. Store is version-guarded, so a slow writer
// holding an older version never overwrites a newer one.
package webhooksig
