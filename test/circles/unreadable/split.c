/* Fixture: braces that #if branches leave unbalanced cannot be read
 * lexically: the checker says so and fails, never guesses */
void split_run(int x)
{
#if SPLIT_A
    if (x > 0) {
#else
    if (x < 0) {
#endif
        x = 0;
    }
}
