/*
 * check_main.c - runs every module suite in one SRunner.
 * CK_RUN_SUITE=core runs one suite; CK_FORK=no runs in-process (gdb).
 */
#include <check.h>
#include <stdlib.h>

#define LYNN_SUITE(name) Suite *name##_suite(void);
#include "suites.h"
#undef LYNN_SUITE

int main(void)
{
	SRunner *sr = srunner_create(NULL);
	int failed;

#define LYNN_SUITE(name) srunner_add_suite(sr, name##_suite());
#include "suites.h"
#undef LYNN_SUITE

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
