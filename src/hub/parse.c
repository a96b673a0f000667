/* parse.c - parsers for hub responses (serving-and-hubs.md §3). Every input
 * is untrusted: sizes are bounded, types checked, and errors name the field.
 * Fuzzed by tests/fuzz/fuzz_hub.c. */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hub_internal.h"
#include "lynn/json.h"

/* Most parts a multipart upload may have (S3's limit). */
#define HUB_MAX_PARTS 10000

double hub_parse_retry_after(const char *v)
{
	char buf[128];
	size_t n;
	time_t t;
	while (*v == ' ' || *v == '\t')
		v++;
	n = strlen(v);
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\r' || v[n - 1] == '\n'))
		n--;
	if (n == 0 || n >= sizeof buf)
		return -1;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (isdigit((unsigned char)buf[0])) {
		double s = 0;
		for (size_t i = 0; i < n; i++) {
			if (!isdigit((unsigned char)buf[i]))
				return -1;
			s = s * 10 + (buf[i] - '0');
			if (s > 1e7)
				return -1;
		}
		return s;
	}
	t = curl_getdate(buf, NULL);
	if (t < 0)
		return -1;
	return t > time(NULL) ? (double)(t - time(NULL)) : 0;
}

void hub_body_message(const char *text, size_t len, char *out, size_t cap)
{
	cJSON *root = NULL;
	const char *m = NULL;
	size_t k = 0;
	out[0] = '\0';
	if (!text || !len || cap < 2)
		return;
	root = cJSON_ParseWithLength(text, len);
	if (root && cJSON_IsObject(root)) {
		static const char *keys[] = { "error", "Message", "message" };
		for (size_t i = 0; i < 3 && !m; i++) {
			cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
			if (cJSON_IsString(v) && v->valuestring[0])
				m = v->valuestring;
			else if (cJSON_IsObject(v)) {
				cJSON *mm = cJSON_GetObjectItemCaseSensitive(v, "message");
				if (cJSON_IsString(mm))
					m = mm->valuestring;
			}
		}
	}
	if (!m && root) /* JSON without a message: say nothing */
		goto out;
	if (!m) {
		/* plain text: its first line */
		for (; k < len && k + 1 < cap && text[k] != '\n'; k++)
			out[k] = isprint((unsigned char)text[k]) ? text[k] : '?';
		out[k] = '\0';
		goto out;
	}
	for (; m[k] && k + 1 < cap; k++)
		out[k] = isprint((unsigned char)m[k]) ? m[k] : '?';
	out[k] = '\0';
out:
	cJSON_Delete(root);
}

cJSON *hub_ms_envelope(const char *what, const char *text, size_t len, cJSON **data,
		       struct lynn_err *err)
{
	cJSON *root, *code, *msg;
	char m[160] = "";
	double cv;
	*data = NULL;
	root = lynn_json_parse(what, text ? text : "", len, err);
	if (!root)
		return NULL;
	if (!cJSON_IsObject(root)) {
		lynn_errf(err, -LYNN_EFORMAT, "hub: %s: reply is not a JSON object", what);
		goto fail;
	}
	code = cJSON_GetObjectItemCaseSensitive(root, "Code");
	if (!cJSON_IsNumber(code)) {
		lynn_errf(err, -LYNN_EFORMAT, "hub: %s: reply has no numeric 'Code'", what);
		goto fail;
	}
	cv = code->valuedouble;
	if (cv != 200) {
		msg = cJSON_GetObjectItemCaseSensitive(root, "Message");
		if (cJSON_IsString(msg)) {
			size_t k = 0;
			for (; msg->valuestring[k] && k + 1 < sizeof m; k++)
				m[k] = isprint((unsigned char)msg->valuestring[k]) ? msg->valuestring[k]
										    : '?';
			m[k] = '\0';
		}
		lynn_errf(err, (cv == 401 || cv == 403) ? -LYNN_EAUTH : -LYNN_EIO,
			  "hub: %s: 'Code' %.0f%s%s", what, cv > -1e15 && cv < 1e15 ? cv : 0.0,
			  m[0] ? ": " : "", m);
		goto fail;
	}
	*data = cJSON_GetObjectItemCaseSensitive(root, "Data");
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}

void hub_remote_files_free(struct hub_remote_file *files, size_t n)
{
	for (size_t i = 0; files && i < n; i++)
		free(files[i].path);
	free(files);
}

static bool is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

static void lower_copy(char *dst, const char *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = (char)tolower((unsigned char)src[i]);
	dst[n] = '\0';
}

int hub_ms_parse_files(const char *text, size_t len, struct hub_remote_file **out,
		       size_t *n_out, struct lynn_err *err)
{
	const char *what = "modelscope repo/files";
	cJSON *data, *root, *files, *f;
	struct hub_remote_file *v = NULL;
	size_t n = 0, cap;
	int rc = 0;

	*out = NULL;
	*n_out = 0;
	root = hub_ms_envelope(what, text, len, &data, err);
	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	files = cJSON_IsObject(data) ? cJSON_GetObjectItemCaseSensitive(data, "Files") : NULL;
	if (cJSON_IsNull(files) || (!files && cJSON_IsObject(data)))
		goto out; /* an empty repo */
	if (!cJSON_IsArray(files)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: 'Data.Files' is not an array", what);
		goto out;
	}
	cap = (size_t)cJSON_GetArraySize(files);
	v = calloc(cap ? cap : 1, sizeof *v);
	if (!v) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	cJSON_ArrayForEach(f, files)
	{
		cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "Path");
		cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "Type");
		cJSON *s = cJSON_GetObjectItemCaseSensitive(f, "Sha256");
		cJSON *z = cJSON_GetObjectItemCaseSensitive(f, "Size");
		if (!cJSON_IsObject(f) || !cJSON_IsString(p)) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "hub: %s: 'Data.Files[%zu].Path' missing or not a string",
				       what, n);
			goto out;
		}
		if (cJSON_IsString(t) && strcmp(t->valuestring, "blob") != 0)
			continue; /* a folder */
		v[n].path = strdup(p->valuestring);
		if (!v[n].path) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			goto out;
		}
		if (cJSON_IsString(s) && is_hex(s->valuestring, 64))
			lower_copy(v[n].sha256, s->valuestring, 64);
		if (cJSON_IsNumber(z) && z->valuedouble >= 0 && z->valuedouble < 1e18)
			v[n].size = (uint64_t)z->valuedouble;
		n++;
	}
out:
	cJSON_Delete(root);
	if (rc) {
		hub_remote_files_free(v, n);
		return rc;
	}
	*out = v;
	*n_out = n;
	return 0;
}

void hub_action_release(struct hub_action *a)
{
	if (!a)
		return;
	free(a->href);
	for (size_t i = 0; i < a->n_headers; i++) {
		free(a->headers[i].name);
		free(a->headers[i].value);
	}
	free(a->headers);
	for (size_t i = 0; i < a->n_parts; i++)
		free(a->parts[i]);
	free(a->parts);
	free(a->verify_href);
	for (size_t i = 0; i < a->n_verify_headers; i++) {
		free(a->verify_headers[i].name);
		free(a->verify_headers[i].value);
	}
	free(a->verify_headers);
	memset(a, 0, sizeof *a);
}

static bool is_url(const char *s)
{
	return !strncmp(s, "https://", 8) || !strncmp(s, "http://", 7);
}

/* Header names and values must not smuggle a line break into the request. */
static bool header_ok(const char *s)
{
	for (; *s; s++)
		if (*s == '\r' || *s == '\n')
			return false;
	return true;
}

/* Copy the string members of `obj` (an LFS action's "header") as headers;
 * with `skip_parts`, numeric keys and chunk_size are left out. */
static int copy_headers(const cJSON *obj, bool skip_parts, struct hub_header **out, size_t *n_out,
			const char *what, struct lynn_err *err)
{
	const cJSON *h;
	size_t n = 0, cap = (size_t)cJSON_GetArraySize(obj);
	struct hub_header *v;
	*out = NULL;
	*n_out = 0;
	if (!cap)
		return 0;
	v = calloc(cap, sizeof *v);
	if (!v)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	cJSON_ArrayForEach(h, obj)
	{
		if (!h->string || !cJSON_IsString(h))
			continue;
		if (skip_parts && (!strcmp(h->string, "chunk_size") ||
				   (h->string[0] && strspn(h->string, "0123456789") == strlen(h->string))))
			continue;
		if (!h->string[0] || !header_ok(h->string) || !header_ok(h->valuestring) ||
		    strchr(h->string, ':')) {
			for (size_t i = 0; i < n; i++) {
				free(v[i].name);
				free(v[i].value);
			}
			free(v);
			return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: bad header in 'header'", what);
		}
		v[n].name = strdup(h->string);
		v[n].value = strdup(h->valuestring);
		if (!v[n].name || !v[n].value) {
			n++;
			for (size_t i = 0; i < n; i++) {
				free(v[i].name);
				free(v[i].value);
			}
			free(v);
			return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		}
		n++;
	}
	*out = v;
	*n_out = n;
	return 0;
}

static int parse_action(bool ms, const cJSON *obj, uint64_t size, struct hub_action *a,
			const char *what, struct lynn_err *err)
{
	const cJSON *acts = cJSON_GetObjectItemCaseSensitive(obj, "actions");
	const cJSON *up, *href, *hdr, *ver;
	int rc;

	memset(a, 0, sizeof *a);
	if (!acts || cJSON_IsNull(acts))
		return 0;
	if (!cJSON_IsObject(acts))
		return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: 'actions' is not an object", what);
	up = cJSON_GetObjectItemCaseSensitive(acts, "upload");
	if (!up || cJSON_IsNull(up))
		return 0; /* verify-only or nothing: the blob is stored */
	href = cJSON_GetObjectItemCaseSensitive(up, "href");
	if (!cJSON_IsObject(up) || !cJSON_IsString(href) || !is_url(href->valuestring))
		return lynn_errf(err, -LYNN_EFORMAT,
				 "hub: %s: 'actions.upload.href' missing or not an http(s) URL", what);
	a->href = strdup(href->valuestring);
	if (!a->href)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	a->kind = HUB_XFER_BASIC;
	hdr = cJSON_GetObjectItemCaseSensitive(up, "header");
	if (hdr && !cJSON_IsNull(hdr) && !cJSON_IsObject(hdr))
		return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: 'actions.upload.header' is not an object",
				 what);
	if (cJSON_IsObject(hdr)) {
		const cJSON *cs = cJSON_GetObjectItemCaseSensitive(hdr, "chunk_size");
		if (!ms && cs) {
			char *end;
			unsigned long long chunk;
			uint64_t need;
			if (!cJSON_IsString(cs) && !cJSON_IsNumber(cs))
				return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: bad 'chunk_size'", what);
			if (cJSON_IsString(cs)) {
				chunk = strtoull(cs->valuestring, &end, 10);
				if (!cs->valuestring[0] || *end)
					chunk = 0;
			} else {
				chunk = cs->valuedouble >= 1 && cs->valuedouble < 1e15
						? (unsigned long long)cs->valuedouble
						: 0;
			}
			if (chunk == 0)
				return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: bad 'chunk_size'", what);
			need = size / chunk + (size % chunk != 0);
			if (need == 0 || need > HUB_MAX_PARTS)
				return lynn_errf(err, -LYNN_EFORMAT,
						 "hub: %s: 'chunk_size' %llu gives %llu parts for %llu bytes",
						 what, chunk, (unsigned long long)need,
						 (unsigned long long)size);
			a->kind = HUB_XFER_MULTIPART;
			a->chunk_size = chunk;
			a->parts = calloc((size_t)need, sizeof *a->parts);
			if (!a->parts)
				return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			a->n_parts = (size_t)need;
			for (size_t i = 0; i < need; i++) {
				char key[16];
				const cJSON *p;
				snprintf(key, sizeof key, "%05zu", i + 1);
				p = cJSON_GetObjectItemCaseSensitive(hdr, key);
				if (!cJSON_IsString(p) || !is_url(p->valuestring))
					return lynn_errf(err, -LYNN_EFORMAT,
							 "hub: %s: multipart part '%s' missing or not a URL "
							 "(%llu parts expected)",
							 what, key, (unsigned long long)need);
				a->parts[i] = strdup(p->valuestring);
				if (!a->parts[i])
					return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			}
			/* no extra part keys beyond ceil(size/chunk) */
			{
				const cJSON *h;
				size_t numeric = 0;
				cJSON_ArrayForEach(h, hdr)
				{
					if (h->string && h->string[0] &&
					    strspn(h->string, "0123456789") == strlen(h->string))
						numeric++;
				}
				if (numeric != need)
					return lynn_errf(err, -LYNN_EFORMAT,
							 "hub: %s: %zu multipart parts, expected %llu", what,
							 numeric, (unsigned long long)need);
			}
		}
		rc = copy_headers(hdr, a->kind == HUB_XFER_MULTIPART, &a->headers, &a->n_headers, what,
				  err);
		if (rc)
			return rc;
	}
	ver = cJSON_GetObjectItemCaseSensitive(acts, "verify");
	if (ver && !cJSON_IsNull(ver)) {
		const cJSON *vh = cJSON_GetObjectItemCaseSensitive(ver, "href");
		const cJSON *vhd = cJSON_GetObjectItemCaseSensitive(ver, "header");
		if (!cJSON_IsObject(ver) || !cJSON_IsString(vh) || !is_url(vh->valuestring))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "hub: %s: 'actions.verify.href' missing or not a URL", what);
		a->verify_href = strdup(vh->valuestring);
		if (!a->verify_href)
			return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		if (cJSON_IsObject(vhd)) {
			rc = copy_headers(vhd, false, &a->verify_headers, &a->n_verify_headers, what,
					  err);
			if (rc)
				return rc;
		}
	}
	return 0;
}

int hub_parse_lfs_batch(bool ms, const char *text, size_t len, size_t n,
			const char *const *oids, const uint64_t *sizes, struct hub_action *acts,
			struct lynn_err *err)
{
	const char *what = ms ? "modelscope lfs batch" : "huggingface lfs batch";
	cJSON *root = NULL, *data = NULL, *objs, *o;
	int rc = 0;
	size_t i;

	for (i = 0; i < n; i++)
		memset(&acts[i], 0, sizeof acts[i]);
	if (ms) {
		root = hub_ms_envelope(what, text, len, &data, err);
		if (!root)
			return err ? err->code : -LYNN_EFORMAT;
	} else {
		root = lynn_json_parse(what, text ? text : "", len, err);
		if (!root)
			return err ? err->code : -LYNN_EFORMAT;
		data = root;
	}
	objs = cJSON_IsObject(data) ? cJSON_GetObjectItemCaseSensitive(data, "objects") : NULL;
	if (!cJSON_IsArray(objs)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: 'objects' missing or not an array", what);
		goto out;
	}
	for (i = 0; i < n; i++) {
		const cJSON *found = NULL, *e;
		cJSON_ArrayForEach(o, objs)
		{
			const cJSON *oid = cJSON_GetObjectItemCaseSensitive(o, "oid");
			if (cJSON_IsString(oid) && !strcmp(oid->valuestring, oids[i])) {
				found = o;
				break;
			}
		}
		if (!found) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: no object for oid '%s'", what,
				       oids[i]);
			goto out;
		}
		e = cJSON_GetObjectItemCaseSensitive(found, "error");
		if (e && !cJSON_IsNull(e)) {
			const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
			const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
			char mm[120] = "";
			if (cJSON_IsString(m)) {
				size_t k = 0;
				for (; m->valuestring[k] && k + 1 < sizeof mm; k++)
					mm[k] = isprint((unsigned char)m->valuestring[k])
							? m->valuestring[k]
							: '?';
				mm[k] = '\0';
			}
			rc = lynn_errf(err, -LYNN_EIO, "hub: %s: oid '%s': error %d%s%s", what, oids[i],
				       cJSON_IsNumber(c) && c->valuedouble > -1e9 && c->valuedouble < 1e9
					       ? (int)c->valuedouble
					       : 0,
				       mm[0] ? ": " : "", mm);
			goto out;
		}
		rc = parse_action(ms, found, sizes[i], &acts[i], what, err);
		if (rc)
			goto out;
	}
out:
	if (rc)
		for (i = 0; i < n; i++)
			hub_action_release(&acts[i]);
	cJSON_Delete(root);
	return rc;
}

int hub_hf_parse_preupload(const char *text, size_t len, size_t n, const char *const *paths,
			   bool *lfs, bool *ignore, char (*oid)[65], struct lynn_err *err)
{
	const char *what = "huggingface preupload";
	cJSON *root, *files, *f;
	int rc = 0;

	root = lynn_json_parse(what, text ? text : "", len, err);
	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	files = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "files") : NULL;
	if (!cJSON_IsArray(files)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: 'files' missing or not an array", what);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const cJSON *found = NULL, *m, *ig, *o;
		cJSON_ArrayForEach(f, files)
		{
			const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "path");
			if (cJSON_IsString(p) && !strcmp(p->valuestring, paths[i])) {
				found = f;
				break;
			}
		}
		if (!found) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: no entry for '%s'", what, paths[i]);
			goto out;
		}
		m = cJSON_GetObjectItemCaseSensitive(found, "uploadMode");
		if (!cJSON_IsString(m) ||
		    (strcmp(m->valuestring, "lfs") && strcmp(m->valuestring, "regular"))) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "hub: %s: '%s': 'uploadMode' is not \"lfs\" or \"regular\"", what,
				       paths[i]);
			goto out;
		}
		lfs[i] = !strcmp(m->valuestring, "lfs");
		ig = cJSON_GetObjectItemCaseSensitive(found, "shouldIgnore");
		ignore[i] = cJSON_IsTrue(ig);
		if (ig && !cJSON_IsBool(ig) && !cJSON_IsNull(ig)) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "hub: %s: '%s': 'shouldIgnore' is not a bool",
				       what, paths[i]);
			goto out;
		}
		o = cJSON_GetObjectItemCaseSensitive(found, "oid");
		oid[i][0] = '\0';
		if (cJSON_IsString(o) && (is_hex(o->valuestring, 64) || is_hex(o->valuestring, 40)))
			lower_copy(oid[i], o->valuestring, strlen(o->valuestring));
	}
out:
	cJSON_Delete(root);
	return rc;
}

static int copy_id(const cJSON *v, char *id, size_t cap, const char *what, const char *field,
		   struct lynn_err *err)
{
	size_t k = 0;
	if (!cJSON_IsString(v) || !v->valuestring[0])
		return lynn_errf(err, -LYNN_EFORMAT, "hub: %s: '%s' missing or not a string", what,
				 field);
	for (; v->valuestring[k] && k + 1 < cap; k++)
		id[k] = isprint((unsigned char)v->valuestring[k]) ? v->valuestring[k] : '?';
	id[k] = '\0';
	return 0;
}

int hub_ms_parse_commit(const char *text, size_t len, char *id, size_t cap, struct lynn_err *err)
{
	const char *what = "modelscope commit";
	cJSON *data, *root = hub_ms_envelope(what, text, len, &data, err);
	int rc;
	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	rc = copy_id(cJSON_IsObject(data) ? cJSON_GetObjectItemCaseSensitive(data, "oid") : NULL,
		     id, cap, what, "Data.oid", err);
	cJSON_Delete(root);
	return rc;
}

int hub_hf_parse_commit(const char *text, size_t len, char *id, size_t cap, struct lynn_err *err)
{
	const char *what = "huggingface commit";
	cJSON *root = lynn_json_parse(what, text ? text : "", len, err);
	int rc;
	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	rc = copy_id(cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "commitOid")
					  : NULL,
		     id, cap, what, "commitOid", err);
	cJSON_Delete(root);
	return rc;
}
