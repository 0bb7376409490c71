// Brown corpus files (tagged `word/tag` text) to running text.
#pragma once

#include <string>

namespace trident::data {

// Turns the tagged text of one Brown file into running text. The rule:
//  * A token is a whitespace-separated `word/tag`; the tag is everything after the
//    last '/', and is dropped (a token without '/' is kept whole).
//  * `` and '' (the corpus's double quotes) become ".
//  * Tokens are joined by one space, except: no space before a closing token
//    (, . ; : ? ! ) ] } and a closing "), and none after an opening one (( [ { and an
//    opening "). Quotes are opening/closing as written in the corpus (`` vs '').
//  * Each non-blank line is a sentence; sentences of a paragraph (lines not
//    separated by a blank line) are joined by one space; paragraphs are separated
//    by one blank line ("\n\n"); the text ends with one '\n' (empty input -> "").
std::string brown_to_text(const std::string& tagged);

// True for names of Brown document files: c, a genre letter a-r, two digits ("ca01").
bool is_brown_document_name(const std::string& filename);

}  // namespace trident::data
