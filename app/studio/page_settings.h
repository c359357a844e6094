#pragma once
// A page's settings kept across restarts: every spin box, combo box, line edit, check box and slider
// of the page (not those inside another control: a spin box's own editor), saved under
// "pages/<page>/" in the app's QSettings, each by its object name or, without one, by its type and
// place among the page's controls of that type. The page's controls as saved (their types and places)
// are saved with them: after an update that added, removed or retyped a control, nothing is restored.
// (An update that only swapped two unnamed controls of one type would swap their values: such
// controls should carry object names.)

#include <QString>

class QSettings;
class QWidget;

namespace gsrq::studio {

void savePageSettings(QSettings& settings, const QString& page, const QWidget* root);
// True where the page's values were restored (a save of the same controls was found).
bool restorePageSettings(QSettings& settings, const QString& page, QWidget* root);

} // namespace gsrq::studio
