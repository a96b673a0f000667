/* fuzz_hub.c - libFuzzer target for every parser of hub replies (src/hub/parse.c):
 * ModelScope envelope, repo file list, LFS batch (both hubs, basic and multipart),
 * HF preupload, both commit replies, Retry-After and error-body messages. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const oids[2] = {
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
	};
	static const char *const paths[2] = { "a.bin", "b/c.txt" };
	const uint64_t sizes[2] = { 1000, (uint64_t)1 << 40 };
	const char *t = (const char *)data;
	struct hub_action acts[2];
	struct hub_remote_file *rf = NULL;
	struct lynn_err e;
	bool lfs[2], ign[2];
	char oid[2][65], id[96], msg[160], *s;
	size_t nr = 0;
	cJSON *root, *d;

	if (hub_parse_lfs_batch(true, t, size, 2, oids, sizes, acts, &e) == 0) {
		hub_action_release(&acts[0]);
		hub_action_release(&acts[1]);
	}
	if (hub_parse_lfs_batch(false, t, size, 2, oids, sizes, acts, &e) == 0) {
		hub_action_release(&acts[0]);
		hub_action_release(&acts[1]);
	}
	hub_hf_parse_preupload(t, size, 2, paths, lfs, ign, oid, &e);
	hub_ms_parse_commit(t, size, id, sizeof id, &e);
	hub_hf_parse_commit(t, size, id, sizeof id, &e);
	if (hub_ms_parse_files(t, size, &rf, &nr, &e) == 0)
		hub_remote_files_free(rf, nr);
	root = hub_ms_envelope("fuzz", t, size, &d, &e);
	cJSON_Delete(root);
	hub_body_message(t, size, msg, sizeof msg);
	s = malloc(size + 1);
	if (s) {
		memcpy(s, data, size);
		s[size] = '\0';
		hub_parse_retry_after(s);
		free(s);
	}
	return 0;
}
