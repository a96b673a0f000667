/* graders.c - tool calls, gold answers, daily-mix (stub; filled next). */
#include "lynn/score.h"
