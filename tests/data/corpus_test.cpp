#include "data/corpus.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"

namespace zoo {
namespace {

TEST(Corpus, RstToTextKeepsProseAndDropsMarkup) {
  const std::string rst = R"(.. _tut-intro:

*************
Control Flow
*************

Besides the :keyword:`while` statement, Python uses the usual
flow control statements, see :ref:`the tutorial <tut-if>` and ``match``.

.. index::
   statement: for

For example::

   >>> x = int(input("Please enter an integer: "))
   >>> print(x)

* A **bold** item with `a link <https://example.org>`_.
* An *emphasised* item with :func:`~os.path.join`.

+------+------+
| cell | cell |
+------+------+

.. note::

   Notes are prose and stay.

.. code-block:: python

   print("dropped")

.. function:: abs(x)

   Return the absolute value of a number.
)";
  const std::string expected =
      "Control Flow\n"
      "Besides the while statement, Python uses the usual flow control statements, see the tutorial and match.\n"
      "For example:\n"
      "A bold item with a link.\n"
      "An emphasised item with join.\n"
      "Notes are prose and stay.\n"
      "abs(x)\n"
      "Return the absolute value of a number.\n";
  EXPECT_EQ(rst_to_text(rst), expected);
}

TEST(Corpus, DefaultCorpusIsSizeableEnglishText) {
  const auto path = testing::shared_corpus();
  const auto text = read_file(path);
  EXPECT_GT(text.size(), 5u * 1000 * 1000) << "bytes";
  EXPECT_EQ(invalid_utf8_offset(text), -1);
  // Prose, not markup: common words are frequent, reST roles and directives are gone.
  EXPECT_NE(text.find(" the "), std::string::npos);
  EXPECT_EQ(text.find(":func:`"), std::string::npos);
  EXPECT_EQ(text.find("\n.. "), std::string::npos);
  // Doctests are gone: of ~8,000 in the sources only the glossary's entry for the prompt stays.
  size_t prompts = 0;
  for (size_t p = text.find("\n>>> "); p != std::string::npos; p = text.find("\n>>> ", p + 1)) ++prompts;
  EXPECT_LE(prompts, 1u);
  size_t documents = 0;
  for (size_t p = text.find("\n\n"); p != std::string::npos; p = text.find("\n\n", p + 2)) ++documents;
  EXPECT_GT(documents, 400u);
}

TEST(Corpus, DefaultPathFollowsTheEnvironment) {
  setenv("ZOO_DATA_DIR", "/srv/zoo-data", 1);
  EXPECT_EQ(default_corpus_path(), "/srv/zoo-data/python-docs.txt");
  unsetenv("ZOO_DATA_DIR");
  setenv("XDG_CACHE_HOME", "/cache", 1);
  EXPECT_EQ(default_corpus_path(), "/cache/zoo/python-docs.txt");
  unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace zoo
