/*
 * arfusion from C: proves that arfusion.h is a C header (compiled here as C11, no C++ compiler
 * involved) and that `pkg-config --cflags --libs arfusion` is all a C program needs to link the
 * static library. Touches no GPU, so it runs anywhere:
 *
 *   cc -std=c11 plain_c.c $(pkg-config --cflags --libs arfusion) -o plain_c && ./plain_c
 *
 * An example, not a test: the library's tests live in tests/.
 */
#include <arfusion/arfusion.h>
#include <stdio.h>

int main(void) {
  arfCommConfig_t config;
  arfFusedArgs_t args;
  arfAlgorithm_t algo = arfAlgoAuto;

  arfCommConfigInit(&config);
  arfFusedArgsInit(&args);
  printf("arfusion %d.%d (API %d): defaults max_tokens %zu, max_hidden %zu, pattern %s\n",
         ARF_VERSION_MAJOR, ARF_VERSION_MINOR, ARF_API_VERSION, config.max_tokens,
         config.max_hidden, arfPatternName(args.pattern));

  /* Algorithm names are spelled the same in the API, the bench's -a and the logs. */
  if (arfAlgorithmFromName("twoshot", &algo) != arfSuccess || algo != arfAlgoTwoshot) {
    fprintf(stderr, "twoshot did not parse: %s\n", arfGetLastErrorString());
    return 1;
  }
  /* An unknown name is an arfInvalidArgument with a reason, not a crash. */
  if (arfAlgorithmFromName("three_shot", &algo) != arfInvalidArgument) return 1;
  printf("unknown name rejected: %s: %s\n", arfGetStatusString(arfInvalidArgument),
         arfGetLastErrorString());
  return 0;
}
